# One lesson under mpirun (one process per rank) against the same lesson on threads: both exit 0
# and write byte-identical checkpoints (the gathered full model + optimizer state).
# -DMPIEXEC=... -DMGPU=... -DNP=N -DLESSON=name -DARGS="a;b;c" -DWORK=dir
file(MAKE_DIRECTORY ${WORK})
set(threads_ckpt ${WORK}/${LESSON}_np${NP}_threads.ckpt)
set(mpi_ckpt ${WORK}/${LESSON}_np${NP}_mpi.ckpt)
file(REMOVE ${threads_ckpt} ${mpi_ckpt})
set(ranks --ranks ${NP})
if(LESSON STREQUAL "single_device")
  set(ranks "")
endif()
execute_process(COMMAND ${MGPU} run ${LESSON} ${ARGS} ${ranks} --checkpoint ${threads_ckpt}
                RESULT_VARIABLE rc_threads OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 100)
if(NOT rc_threads EQUAL 0)
  message(FATAL_ERROR "thread run failed (${rc_threads}):\n${out}\n${err}")
endif()
execute_process(COMMAND ${MPIEXEC} --oversubscribe --allow-run-as-root -n ${NP} ${MGPU} run ${LESSON}
                        ${ARGS} --checkpoint ${mpi_ckpt} --comm-timeout 20
                RESULT_VARIABLE rc_mpi OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 100)
if(NOT rc_mpi EQUAL 0)
  message(FATAL_ERROR "mpirun -n ${NP} failed (${rc_mpi}):\n${out}\n${err}")
endif()
execute_process(COMMAND ${CMAKE_COMMAND} -E compare_files ${threads_ckpt} ${mpi_ckpt}
                RESULT_VARIABLE differ)
if(NOT differ EQUAL 0)
  message(FATAL_ERROR "mpirun -n ${NP} ${LESSON}: checkpoint differs from the thread run's")
endif()
message(STATUS "mpirun -n ${NP} ${LESSON}: exit 0, checkpoint identical to the thread run's")
