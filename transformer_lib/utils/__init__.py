"""Small helpers every layer may use: argument checks, the device, a module's mode, counting parameters."""
