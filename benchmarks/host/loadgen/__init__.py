"""The load generator: streamed requests over aiohttp (client), levels (runner), figures (stats).

The figures follow `vllm bench serve`'s definitions (vllm/benchmarks/serve.py and
lib/endpoint_request_func.py); benchmarks/README.md lists them and the two deviations.
"""
