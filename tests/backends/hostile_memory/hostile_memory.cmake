# hostile_memory: a test-only backend module (README.md). tests/CMakeLists.txt finds this file as
# it finds any test backend's; the registry then lists the module as any, so that every
# device-parameterised suite runs it, locally and behind tensorwire-server --backend.
tw_backend_module(hostile_memory TEST_ONLY
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/hostile_memory_backend.cc)

# Its own tests: that its pages crash a host access, and where an injected fault surfaces.
add_executable(tw_test_hostile_memory ${CMAKE_CURRENT_LIST_DIR}/hostile_memory_test.cc)
target_link_libraries(tw_test_hostile_memory PRIVATE tw_test_support ${CMAKE_DL_LIBS})
target_compile_definitions(tw_test_hostile_memory PRIVATE
  TW_SERVER_BINARY="$<TARGET_FILE:tensorwire-server>"
  TW_HOSTILE_MEMORY_MODULE="$<TARGET_FILE:tw_backend_hostile_memory>")
add_dependencies(tw_test_hostile_memory tensorwire-server tw_backend_hostile_memory)
add_test(NAME tw_test_hostile_memory COMMAND tw_test_hostile_memory)
set_tests_properties(tw_test_hostile_memory PROPERTIES TIMEOUT ${TW_TEST_TIMEOUT})
