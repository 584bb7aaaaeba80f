"""The `synth` command line: parse input, build settings and objects, hand over to pipeline/worker."""
