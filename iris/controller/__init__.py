"""The control-plane daemon (`iris controller serve`) and what daemons share: health, metrics, logs."""
