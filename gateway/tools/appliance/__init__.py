"""The on-prem appliance: an offline bundle (``bundle``), its installer (``installer``, standard
library only, also shipped inside the bundle) and the install's health check (``doctor``)."""
