"""Audio encoders for Wan's audio-driven models (S2V, HuMo, InfiniteTalk): wav2vec 2.0 (large and
base) and Whisper large-v3's encoder, the files of ComfyUI's `audio_encoders` folder.
`model.py` loads one (kind by tensor names, geometry by shapes) into the AUDIO_ENCODER wire object;
`wav2vec2.py` and `whisper.py` are the networks."""
