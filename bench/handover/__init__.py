"""The handover benchmark (``python -m bench --only handover``): reference apps with their
sidecars, a Java ``ConsumerRebalanceListener`` and Dapr under churn, counted per record.
The correctness test (tests/handover) runs its graceful part on the reference apps."""
