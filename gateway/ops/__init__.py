"""Operations: metrics, tracing, logs, the scaling signal, background work, state shared between gateways."""
