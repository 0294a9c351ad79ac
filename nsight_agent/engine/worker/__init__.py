"""The worker side: the warm worker and its main loop, the child process of analyze.kernel, by-value shipping of callables, the timing loop. Runs in processes other than the server's."""
