"""Router: SGLang's router in front of several replicas; `ddtree router` and the process it launches."""
