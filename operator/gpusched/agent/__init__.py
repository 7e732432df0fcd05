"""The node agent: reads GPU topology (NVML or ``nvidia-smi topo -m``) and publishes it."""
