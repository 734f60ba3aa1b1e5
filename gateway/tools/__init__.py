"""The command line and what it starts: the server (uvicorn, server.py), calibration, the appliance,
model export."""
