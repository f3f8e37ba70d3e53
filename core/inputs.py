"""Make input sets from the ONNX signature, or read the user's own feeds.

STUB — contract:
DEFAULT_INT_RANGE = (0, 100) ... documented rule for integer inputs; mask-like names -> ones.
make_input_sets(signature, *, dims={}, n_sets=1, seed=0, int_ranges={}) -> tuple[InputSet, ...]
    set 0 at the chosen sizes; later sets change each symbolic dim by a documented rule.
load_input_files(paths, signature) -> tuple[InputSet, ...]   one set per .npz (no pickle)
check_feeds(feeds, signature, *, where) -> None    InputError naming the input
"""
