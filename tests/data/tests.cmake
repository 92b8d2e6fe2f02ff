# Data module tests (tokenizer, shards, loader).
