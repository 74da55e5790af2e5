"""Kernel times for the GPU target: the op vocabulary (``ops``), the public measured data and
its readers (``sources``), the measured grids with their interpolation (``grid``), the fitted
model (``model``) and its leave-one-GPU-out evaluation (``evaluate``), kernel-time tables made
by builds (``tables``), and the ``pimbuild-kernels`` command (``cli``)."""
