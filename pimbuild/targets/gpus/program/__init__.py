"""The GPU target's partitioned program: the kernels of the lowered graph (``kernels``), the
engine kernels they fuse into (``fusion``), the partition of the graph by device
(``partition``), the processes that run it (``workers``) and kernel timing on a CUDA device
(``cuda``)."""
