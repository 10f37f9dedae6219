# CLI tests: `ditto verify` on the shared fixtures, and its error handling.
#
# Included from tests/CMakeLists.txt. The same file is also the script of the
# error-handling tests: run as `cmake -DDITTO_EXE=... -DCHECK=... -DWORK=... -P
# cli.cmake`, it runs one check and fails with a message.

if(CMAKE_SCRIPT_MODE_FILE)
  # ---- script mode: one check --------------------------------------------------
  file(REMOVE_RECURSE ${WORK})
  file(MAKE_DIRECTORY ${WORK})

  # run_ditto(args...): sets rc, out, err
  function(run_ditto)
    execute_process(COMMAND ${DITTO_EXE} ${ARGN}
      RESULT_VARIABLE r OUTPUT_VARIABLE o ERROR_VARIABLE e TIMEOUT 120)
    set(rc "${r}" PARENT_SCOPE)
    set(out "${o}" PARENT_SCOPE)
    set(err "${e}" PARENT_SCOPE)
  endfunction()

  function(fail what)
    message(FATAL_ERROR "${CHECK}: ${what}\nexit status: ${rc}\n--- stdout:\n${out}\n--- stderr:\n${err}")
  endfunction()

  # expect_rc(N): exact exit status
  macro(expect_rc n)
    if(NOT "${rc}" STREQUAL "${n}")
      fail("expected exit status ${n}")
    endif()
  endmacro()

  # The whole error is one line on stderr that contains `needle`.
  macro(expect_one_error_line needle)
    string(STRIP "${err}" e_)
    string(FIND "${e_}" "\n" nl_)
    if(e_ STREQUAL "" OR NOT nl_ EQUAL -1)
      fail("expected exactly one line on stderr")
    endif()
    string(FIND "${e_}" "${needle}" at_)
    if(at_ EQUAL -1)
      fail("stderr does not name '${needle}'")
    endif()
  endmacro()

  macro(expect_in text needle)
    string(FIND "${text}" "${needle}" at_)
    if(at_ EQUAL -1)
      fail("expected '${needle}' in the output")
    endif()
  endmacro()

  # One-case manifest; tolerances as in the fixture format.
  function(write_manifest dir name kind module weights io)
    file(WRITE ${dir}/manifest.json "{\"cases\": [{\"name\": \"${name}\", \"kind\": \"${kind}\", \"module\": \"${module}\",
 \"weights_file\": ${weights}, \"io_file\": ${io}, \"batch\": 1,
 \"inputs\": {\"kp_source\": {\"shape\": [1, 21, 3]}, \"kp_driving\": {\"shape\": [1, 21, 3]}},
 \"outputs\": {\"kp_driving_new\": {\"shape\": [1, 21, 3]}},
 \"tolerance\": {\"kp_driving_new\": {\"fp32\": {\"rel_l2\": 1e-4, \"max_abs_over_max_ref\": 1e-3}}}}]}\n")
  endfunction()

  if(CHECK STREQUAL "missing_dir")
    set(path ${WORK}/no-such-fixtures)
    run_ditto(verify --fixtures ${path})
    expect_rc(2)
    expect_one_error_line(${path})
  elseif(CHECK STREQUAL "no_manifest")
    run_ditto(verify --fixtures ${WORK})
    expect_rc(2)
    expect_one_error_line(${WORK}/manifest.json)
  elseif(CHECK STREQUAL "bad_json")
    file(WRITE ${WORK}/manifest.json "{\"cases\": [ {\"name\": \"x\",\n")
    run_ditto(verify --fixtures ${WORK})
    expect_rc(2)
    expect_one_error_line(${WORK}/manifest.json)
  elseif(CHECK STREQUAL "no_cases")
    file(WRITE ${WORK}/manifest.json "{\"set\": \"empty\"}\n")
    run_ditto(verify --fixtures ${WORK})
    expect_rc(2)
    expect_one_error_line(${WORK}/manifest.json)
  elseif(CHECK STREQUAL "missing_io")
    write_manifest(${WORK} stitching_b1 module x.StitchingNetwork "\"stitching.pth\"" "\"missing.io.pth\"")
    run_ditto(verify --fixtures ${WORK})
    expect_rc(1)
    expect_in("${out}" "missing.io.pth")
    expect_in("${out}" "ERROR")
    expect_in("${out}" "0 passed, 1 failed, 0 unsupported")
  elseif(CHECK STREQUAL "bad_io")
    # a truncated / corrupt io file must be an error line, not a crash
    file(WRITE ${WORK}/bad.io.pth "PK this is not a zip archive")
    write_manifest(${WORK} stitching_b1 module x.StitchingNetwork "\"stitching.pth\"" "\"bad.io.pth\"")
    run_ditto(verify --fixtures ${WORK})
    expect_rc(1)
    expect_in("${out}" "bad.io.pth")
    expect_in("${out}" "ERROR")
  elseif(CHECK STREQUAL "unsupported")
    write_manifest(${WORK} future_case future_kind core.models.Future "\"future.pth\"" "\"future.io.pth\"")
    run_ditto(verify --fixtures ${WORK})
    expect_rc(1)
    expect_in("${out}" "UNSUPPORTED")
    expect_in("${out}" "0 passed, 0 failed, 1 unsupported")
  elseif(CHECK STREQUAL "list")
    write_manifest(${WORK} future_case future_kind core.models.Future "\"future.pth\"" "\"future.io.pth\"")
    run_ditto(verify --fixtures ${WORK}/manifest.json --list)
    expect_rc(0)
    expect_in("${out}" "unsupported")
  elseif(CHECK STREQUAL "no_match")
    write_manifest(${WORK} future_case future_kind core.models.Future "\"future.pth\"" "\"future.io.pth\"")
    run_ditto(verify --fixtures ${WORK} --case "warp_*,nothing_like_this")
    expect_rc(2)
    expect_one_error_line("warp_*")
  elseif(CHECK STREQUAL "usage")
    run_ditto(verify)
    expect_rc(2)
    expect_one_error_line("--fixtures")
    run_ditto(verify --fixtures ${WORK} --no-such-option)
    expect_rc(2)
    expect_one_error_line("--no-such-option")
    run_ditto(verify --fixtures ${WORK} --backend tpu)
    expect_rc(2)
    expect_one_error_line("tpu")
    run_ditto(verify --fixtures ${WORK} --threads many)
    expect_rc(2)
    expect_one_error_line("many")
    run_ditto(verify --fixtures)
    expect_rc(2)
    expect_one_error_line("--fixtures")
    run_ditto(verify --fixtures ${WORK} --fp16)
    expect_rc(2)
    expect_one_error_line("--fp16")
    run_ditto(verify --help)
    expect_rc(0)
    foreach(o --fixtures --case --backend --fp16 --threads --intermediates --strict-intermediates --list --help)
      expect_in("${out}" "${o}")
    endforeach()
  elseif(CHECK STREQUAL "info_fixture")
    run_ditto(info ${FIXTURES}/stitching.pth)
    expect_rc(0)
    expect_in("${out}" "retarget_shoulder.mlp.0.weight")
    expect_in("${out}" "(128,126)")
  elseif(CHECK STREQUAL "info_errors")
    run_ditto(info ${WORK}/missing.pth)
    expect_rc(1)
    expect_one_error_line(${WORK}/missing.pth)
    file(WRITE ${WORK}/not-a-checkpoint.pth "PK\x03\x04 definitely not a zip archive")
    run_ditto(info ${WORK}/not-a-checkpoint.pth)
    expect_rc(1)
    expect_one_error_line(${WORK}/not-a-checkpoint.pth)
    run_ditto(info --help)
    expect_rc(0)
    run_ditto(info)
    expect_rc(2)
  elseif(CHECK STREQUAL "bench")
    # ditto bench on the small synthetic networks: every reporting mode, and item 0 identical across batch sizes
    run_ditto(bench --small --batch 1,2 --iters 1 --warmup 0 --loop --fidelity --profile=5 --json ${WORK}/b.json)
    expect_rc(0)
    foreach(needle "post ms/f" "fidelity image" "profile:" "per op:")
      expect_in("${out}" "${needle}")
    endforeach()
    expect_in("${err}" "bit-identical")
    file(READ ${WORK}/b.json j_)
    string(JSON n_ LENGTH "${j_}" results)
    string(JSON cos_ GET "${j_}" fidelity_vs_cpu_f32 image_cosine)
    if(NOT n_ EQUAL 2 OR NOT cos_ EQUAL 1)
      fail("JSON: ${n_} results, image cosine ${cos_}")
    endif()
    run_ditto(bench --graph --small)
    expect_rc(2)
    run_ditto(bench --batch 0)
    expect_rc(2)
  elseif(CHECK STREQUAL "bench_lmdm")
    # ditto bench --lmdm on the small synthetic LMDM: timing table, JSON, and the parity
    # run (cpu against cpu here: must be exactly 0)
    run_ditto(bench --lmdm --small --windows 2 --steps 3 --parity 1 --json ${WORK}/l.json)
    expect_rc(0)
    foreach(needle "op by op" "vs cpu float32")
      expect_in("${out}" "${needle}")
    endforeach()
    file(READ ${WORK}/l.json j_)
    string(JSON w_ GET "${j_}" windows)
    string(JSON rel_ GET "${j_}" vs_cpu_rel_l2)
    if(NOT w_ EQUAL 2 OR NOT rel_ EQUAL 0)
      fail("JSON: ${w_} windows, rel-L2 ${rel_}")
    endif()
    run_ditto(bench --lmdm --steps 0)
    expect_rc(2)
  elseif(CHECK STREQUAL "no_cuda")
    write_manifest(${WORK} stitching_b1 module x.StitchingNetwork "\"stitching.pth\"" "\"stitching_b1.io.pth\"")
    run_ditto(verify --fixtures ${WORK} --backend cuda)
    expect_rc(2)
    expect_one_error_line("cuda")
  else()
    message(FATAL_ERROR "cli.cmake: unknown CHECK '${CHECK}'")
  endif()
  return()
endif()

# ---- configure mode: register the tests -----------------------------------------

# The HuBERT-architecture ONNX case made by scripts/make_hubert_onnx.py (committed; no ../shared needed).
add_test(NAME verify_hubert_onnx COMMAND ditto verify --fixtures ${CMAKE_SOURCE_DIR}/tests/data/hubert)
set_tests_properties(verify_hubert_onnx PROPERTIES LABELS cli TIMEOUT 300)

set(DITTO_CLI_CHECKS missing_dir no_manifest bad_json no_cases missing_io bad_io unsupported list no_match usage info_errors bench bench_lmdm)
if(NOT DITTO_HAVE_CUDA)
  list(APPEND DITTO_CLI_CHECKS no_cuda)
endif()
foreach(check ${DITTO_CLI_CHECKS})
  add_test(NAME cli_verify_${check}
    COMMAND ${CMAKE_COMMAND} -DDITTO_EXE=$<TARGET_FILE:ditto> -DCHECK=${check}
            -DWORK=${CMAKE_CURRENT_BINARY_DIR}/cli_verify_${check} -P ${CMAKE_CURRENT_LIST_FILE})
  set_tests_properties(cli_verify_${check} PROPERTIES LABELS cli TIMEOUT 300)
endforeach()

# The golden fixtures (../shared/fixtures/ditto), one test per network / family.
get_filename_component(DITTO_FIXTURES_DIR ${CMAKE_SOURCE_DIR}/../shared/fixtures/ditto ABSOLUTE)
if(EXISTS ${DITTO_FIXTURES_DIR}/manifest.json)
  set(DITTO_VERIFY_GROUPS
    "appearance=appearance_*"
    "motion=motion_*"
    "warp=warp_*"
    "decoder=decoder_*"
    "stitching=stitching_*"
    "functions=fn_grid_sample_3d,fn_make_coordinate_grid,fn_kp2gaussian"
    "keypoints=fn_bin66_to_degree,fn_rotation_matrix,fn_transform_keypoint"
    "conditions=cond_*"
    "motion_stitch=ms_*"
    "smoothing=smooth_*"
    "lmdm=lmdm_*"
    "audio2motion=a2m_*")
  foreach(group ${DITTO_VERIFY_GROUPS})
    string(REGEX REPLACE "=.*" "" name "${group}")
    string(REGEX REPLACE "^[^=]*=" "" patterns "${group}")
    add_test(NAME verify_${name} COMMAND ditto verify --fixtures ${DITTO_FIXTURES_DIR} --case ${patterns})
    set_tests_properties(verify_${name} PROPERTIES LABELS "fixtures;cli" TIMEOUT 900)
  endforeach()
  get_filename_component(DITTO_ONNX_FIXTURES_DIR ${CMAKE_SOURCE_DIR}/../shared/fixtures/onnx ABSOLUTE)
  if(EXISTS ${DITTO_ONNX_FIXTURES_DIR}/manifest.json)
    add_test(NAME verify_onnx_models COMMAND ditto verify --fixtures ${DITTO_ONNX_FIXTURES_DIR})
    set_tests_properties(verify_onnx_models PROPERTIES LABELS "fixtures;cli" TIMEOUT 900)
  endif()
  add_test(NAME cli_info_fixture
    COMMAND ${CMAKE_COMMAND} -DDITTO_EXE=$<TARGET_FILE:ditto> -DCHECK=info_fixture -DFIXTURES=${DITTO_FIXTURES_DIR}
            -DWORK=${CMAKE_CURRENT_BINARY_DIR}/cli_info_fixture -P ${CMAKE_CURRENT_LIST_FILE})
  set_tests_properties(cli_info_fixture PROPERTIES LABELS "fixtures;cli")
  add_test(NAME cli_verify_list_fixtures COMMAND ditto verify --fixtures ${DITTO_FIXTURES_DIR} --list)
  set_tests_properties(cli_verify_list_fixtures PROPERTIES LABELS cli)
endif()
