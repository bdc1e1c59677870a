"""The cleanup bench (``make cleanup-bench``) and the one-endpoint sweep the simulator
and the tests run the cleanup tasks with."""
