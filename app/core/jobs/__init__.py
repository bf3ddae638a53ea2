"""The KV stage as jobs run it: the tasks (summarize, ask, extract) as streams of events, the ring
of segments in step with llama.cpp's cache, and the audit that checks both against the engine."""
