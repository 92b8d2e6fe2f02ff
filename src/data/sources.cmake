# Sources of the data module (tokenizer, shard formats, loader), added to libhandgrad.
target_sources(handgrad PRIVATE
)
