"""Facts about the compute device that choices are made from (attention backend probes)."""
