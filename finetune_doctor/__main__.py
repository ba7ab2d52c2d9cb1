from finetune_doctor.cli import main

main()
