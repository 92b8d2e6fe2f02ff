# Op tests: every CPU kernel against double references and finite differences.
hg_test(test_ops test_ops.c test_ops_layernorm.c test_ops_matmul.c test_ops_classifier.c
        test_ops_attention.c test_ops_llama.c ops_reference.c ops_util.c)

# The kernels of an optimised AVX-512 build are vectorised (skipped on other builds).
add_test(NAME check_vectorized
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/check_vectorized.sh $<TARGET_FILE:handgrad> $<CONFIG>
                 $<BOOL:${HANDGRAD_NATIVE}> $<OR:$<BOOL:${HANDGRAD_SANITIZE}>,$<BOOL:${HANDGRAD_FUZZ}>>)
set_tests_properties(check_vectorized PROPERTIES SKIP_RETURN_CODE 77)

# The bf16 ops against the fp32 ops on the same bf16 values (then on the portable path
# too, where this CPU has oneDNN's bf16 kernels).
hg_test(test_ops_bf16 test_ops_bf16.c ops_util.c)
