from finetune_doctor.cli import entry

entry()
