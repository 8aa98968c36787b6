"""What the user wrote, read plainly: TOML tables key by key, corpora, the decision question, a model folder's fitness."""
