# Sourced by the bench scripts: `torch_py ARGS...` runs /usr/bin/python3 for the PyTorch side with
# OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE unset in that command alone (they make Debian's OpenBLAS
# run an older, slower kernel; bench/blas_info.py says which kernel it runs instead). Nothing
# else, tensorwire's side included, sees the change.
torch_py() {
  env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE /usr/bin/python3 "$@"
}
