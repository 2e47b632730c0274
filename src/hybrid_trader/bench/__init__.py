"""Throughput benchmarks behind ``hybrid-trader bench``; each prints JSON on its last line."""
