# Thin wrapper over CMake for the README commands.
#   make          build (Release) into build/
#   make test     install missing Debian packages, build, run every CPU test
#   make demo     install missing Debian packages, build, run the main job
#   make asan     build with ASan/UBSan into build-asan/ and run the tests there
BUILD ?= build
JOBS  ?= $(shell nproc 2>/dev/null || echo 2)
CMAKE_FLAGS ?=

.PHONY: all deps configure build test demo asan clean

all: build

deps:
	@scripts/install-deps.sh

configure: deps
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release $(CMAKE_FLAGS) >/dev/null

build: configure
	@cmake --build $(BUILD) -j $(JOBS)

test: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

demo: build
	@scripts/demo.sh $(BUILD)

asan:
	@$(MAKE) --no-print-directory test BUILD=build-asan CMAKE_FLAGS="-DDITTO_SANITIZE=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo"

clean:
	rm -rf $(BUILD) build-asan
