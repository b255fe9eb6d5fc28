"""The four parts of `bench/throughput.py`: limit, triton (the job's client), job, train."""
