"""What a wheel file is: its archive checks, its file name and PEP 825 variants."""
