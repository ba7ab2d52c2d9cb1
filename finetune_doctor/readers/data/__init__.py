"""Readers of datasets: dataset_info.json entries and the rows of local dataset files, streamed."""
