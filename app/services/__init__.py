"""The use cases both faces call: open an engine, run a job, record it, keep and resume its KV
state, fetch a model. Qt-free and argparse-free: the window and the command line turn their
input into these calls and their results into widgets or text, so they decide nothing twice."""
