"""The on-prem appliance: an offline bundle (``bundle``), its installer (the ``installer`` package,
standard library only, also shipped inside the bundle) and the install's health check (``doctor``,
with ``doctor_host`` for the machine's side and ``doctor_report`` for its findings)."""
