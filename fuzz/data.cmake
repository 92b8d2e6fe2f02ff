# Fuzz targets for the data module's parsers.
hg_fuzz(fuzz_tiktoken fuzz_tiktoken.c)
hg_fuzz(fuzz_vocab_hf fuzz_vocab_hf.c)
hg_fuzz(fuzz_tokenizer_json fuzz_tokenizer_json.c)
hg_fuzz(fuzz_shard fuzz_shard.c)
hg_fuzz(fuzz_encode fuzz_encode.c)
hg_fuzz(fuzz_train fuzz_train.c)
hg_fuzz(fuzz_chat_jsonl fuzz_chat_jsonl.c)
