# Sources of the data module (tokenizer, shard formats, loader), added to libhandgrad.
target_sources(handgrad PRIVATE
  data/fileio.c
  data/utf8.c
  data/table.c
  data/pretok.c
  data/tokenizer.c
  data/decode.c
  data/vocab_tiktoken.c
  data/vocab_hf.c
  data/bpe_train.c
  data/shard.c
  data/loader.c
  data/prepare.c
)
