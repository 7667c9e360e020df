// keeps titan_test_util non-empty
