"""The script `parity dashboard` hands to Streamlit: the packaged dashboard's frame."""

from parity.dashboard.frame import main

main()
