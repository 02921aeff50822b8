# ctest script: trains the 256-128-100 ReLU MLP (Adam, batch 128) on Fashion-MNIST for 15 epochs with
# gpulab-cli and fails unless the final test accuracy reaches MIN_ACCURACY.
execute_process(
  COMMAND ${CLI} train --dataset fashion-mnist --model mlp --hidden 256,128,100 --optimizer adam --lr 0.001
          --batch-size 128 --epochs 15 --device auto --seed 0 --json
  OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "gpulab-cli failed (${rc}): ${err}")
endif()
string(REGEX MATCHALL "\"event\":\"epoch\"[^\n]*" epochs "${out}")
foreach(e IN LISTS epochs)
  message(STATUS "${e}")
endforeach()
string(REGEX MATCH "\"event\":\"done\"[^\n]*" done "${out}")
string(REGEX MATCH "\"test_accuracy\":([0-9.]+)" _ "${done}")
set(acc "${CMAKE_MATCH_1}")
message(STATUS "Fashion-MNIST test accuracy after 15 epochs: ${acc} (required: ${MIN_ACCURACY})")
if(acc STREQUAL "" OR acc LESS MIN_ACCURACY)
  message(FATAL_ERROR "accuracy ${acc} is below ${MIN_ACCURACY}")
endif()
