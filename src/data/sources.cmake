# Sources of the data module (tokenizer, shard formats, loader), added to libhandgrad.
target_sources(handgrad PRIVATE
  data/fileio.c
  data/utf8.c
  data/table.c
  data/pretok.c
  data/normalize.c
  data/tokenizer.c
  data/encode.c
  data/decode.c
  data/vocab_tiktoken.c
  data/vocab_hf.c
  data/vocab_tokjson.c
  data/tokjson_pipeline.c
  data/bpe_train.c
  data/shard.c
  data/loader.c
  data/prepare.c
  data/prepare_chat.c
  data/chat_template.c
)
# utf8proc: Unicode normalization (NFC) for tokenizer.json normalizers (Qwen2's).
pkg_check_modules(UTF8PROC REQUIRED IMPORTED_TARGET libutf8proc)
target_link_libraries(handgrad PUBLIC PkgConfig::UTF8PROC)
