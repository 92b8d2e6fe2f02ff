# Op tests: every CPU kernel against double references and finite differences.
hg_test(test_ops test_ops.c test_ops_layernorm.c test_ops_matmul.c test_ops_classifier.c
        test_ops_attention.c ops_reference.c ops_util.c)
