"""The input stage: chunking, the prompt frame, the strategies and the plans they make, the plan
cache and codec, and the planning child process."""
