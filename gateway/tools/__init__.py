"""Tools apart from the request path: the command line, calibration, the appliance, model export."""
