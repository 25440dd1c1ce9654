"""The parts of tools/perturb.py (``make perturb``), one concept a module: the settings, the seed offset installed in
the kernel, one run in a worker process, the runs and their claim logs, the report."""
