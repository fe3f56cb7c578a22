# One lesson under mpirun (one process per rank) against the same lesson on threads: both exit 0,
# print the same report, write byte-identical checkpoints (the gathered full model + optimizer
# state) and, on the modeled clock, the same trace event for event (the merged trace of the processes vs the thread run's,
# compared parsed by TRACE_COMPARE: names, ts, dur, ranks, sent_bytes, memory samples).
# -DMPIEXEC=... -DMGPU=... -DTRACE_COMPARE=... -DNP=N -DLESSON=name -DARGS="a;b;c" -DWORK=dir
# -DNAME=case name (files in WORK are named after it)
file(MAKE_DIRECTORY ${WORK})
set(threads_ckpt ${WORK}/${NAME}_threads.ckpt)
set(mpi_ckpt ${WORK}/${NAME}_mpi.ckpt)
set(threads_trace ${WORK}/${NAME}_threads.json)
set(mpi_trace ${WORK}/${NAME}_mpi.json)
file(REMOVE ${threads_ckpt} ${mpi_ckpt} ${threads_trace} ${mpi_trace})
set(ranks --ranks ${NP})
if(LESSON STREQUAL "single_device")
  set(ranks "")
endif()
set(threads_save --checkpoint ${threads_ckpt})
set(mpi_save --checkpoint ${mpi_ckpt})
if(LESSON STREQUAL "collectives")  # trains nothing: its trace is the whole result
  set(threads_save "")
  set(mpi_save "")
endif()
execute_process(COMMAND ${MGPU} run ${LESSON} ${ARGS} ${ranks} ${threads_save}
                        --trace ${threads_trace}
                RESULT_VARIABLE rc_threads OUTPUT_VARIABLE threads_report ERROR_VARIABLE err
                TIMEOUT 100)
if(NOT rc_threads EQUAL 0)
  message(FATAL_ERROR "thread run failed (${rc_threads}):\n${threads_report}\n${err}")
endif()
execute_process(COMMAND ${MPIEXEC} --oversubscribe --allow-run-as-root -n ${NP} ${MGPU} run ${LESSON}
                        ${ARGS} ${mpi_save} --trace ${mpi_trace} --comm-timeout 20
                RESULT_VARIABLE rc_mpi OUTPUT_VARIABLE mpi_report ERROR_VARIABLE err TIMEOUT 100)
if(NOT rc_mpi EQUAL 0)
  message(FATAL_ERROR "mpirun -n ${NP} failed (${rc_mpi}):\n${mpi_report}\n${err}")
endif()
if(mpi_report MATCHES " NO\n")
  message(FATAL_ERROR "mpirun -n ${NP} ${LESSON}: a result is wrong (NO):\n${mpi_report}")
endif()
# Rank 0's report equals the thread run's line for line, but for the file names and what only
# one of them can print: the collectives lesson's race against MPI_Allreduce (mpirun only) and
# wall-clock throughput.
foreach(side threads mpi)
  set(report "${${side}_report}")
  string(REPLACE "${${side}_ckpt}" "CHECKPOINT" report "${report}")
  string(REPLACE "${${side}_trace}" "TRACE" report "${report}")
  string(REGEX REPLACE "ring all-reduce on MPI send/recv vs MPI_Allreduce[^\n]*\n( [^\n]*\n)*" ""
         report "${report}")
  string(REGEX REPLACE "[0-9,]+ tokens/s on this machine \\([^)]*\\)" "(wall clock)" report
         "${report}")
  set(${side}_report "${report}")
endforeach()
if(NOT threads_report STREQUAL mpi_report)
  message(FATAL_ERROR "mpirun -n ${NP} ${LESSON}: rank 0's report differs from the thread run's:\n"
                      "--- threads:\n${threads_report}\n--- mpirun:\n${mpi_report}")
endif()
set(differ 0)
if(threads_save)
  execute_process(COMMAND ${CMAKE_COMMAND} -E compare_files ${threads_ckpt} ${mpi_ckpt}
                  RESULT_VARIABLE differ)
endif()
if(NOT differ EQUAL 0)
  message(FATAL_ERROR "mpirun -n ${NP} ${LESSON}: checkpoint differs from the thread run's")
endif()
execute_process(COMMAND ${TRACE_COMPARE} ${threads_trace} ${mpi_trace}
                RESULT_VARIABLE trace_differs OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 60)
if(NOT trace_differs EQUAL 0)
  message(FATAL_ERROR "mpirun -n ${NP} ${LESSON}: trace differs from the thread run's "
                      "(A = threads, B = mpirun):\n${out}${err}")
endif()
message(STATUS "mpirun -n ${NP} ${LESSON}: exit 0, checkpoint and trace identical to the thread "
               "run's (${out})")
