raise RuntimeError("prestartup of broken_pack failed on purpose")
