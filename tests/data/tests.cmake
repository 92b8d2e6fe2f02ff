# Data module tests (tokenizer, shards, loader).
hg_test(test_tokenizer data/test_tokenizer.c)
hg_test(test_tokenizer_gpt2 data/test_tokenizer_gpt2.c)
set_tests_properties(test_tokenizer_gpt2 PROPERTIES SKIP_RETURN_CODE 77)
hg_test(test_tokjson data/test_tokjson.c)
hg_test(test_data_errors data/test_data_errors.c)
hg_test(test_loader data/test_loader.c)
hg_test(test_prepare data/test_prepare.c)
add_test(NAME cli_data COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/data/cli_data.sh $<TARGET_FILE:handgrad_cli>)
