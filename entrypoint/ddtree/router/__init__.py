"""Router: `ddtree router` runs SGLang's router in front of several replicas (cmd) and the process it
execs with the key in memory (launch). Whether a URL is a router is the client's question: bench.replicas."""
