"""manyadd: the project's files from Python.

    from manyadd import safetensors
    tensors, metadata = safetensors.read("models/cpu-sa1010-1l4h-d64/model.safetensors")

Modules: safetensors (the one reader and writer, validated as strictly as the C++ one in
core/src/safetensors.cpp), files (the atomic writer and InputError). Importing the package imports
nothing outside the standard library; numpy is used when it is installed.
"""
