"""CPU-only start-up hook (``sitecustomize.py``) for stock SGLang; put this folder on PYTHONPATH."""
