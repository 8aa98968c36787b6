"""The runner: campaign files, corpora, trials, metrics and machine facts."""
