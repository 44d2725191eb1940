"""cosmos-reasoner-server: the flag table and the command each vLLM release gets, version detection, settings,
pre-start checks, and supervision of a stand-in server process (readiness, log forwarding, restart with
backoff, no restart after a usage error or a repeated start failure, stopping the whole process group)."""
