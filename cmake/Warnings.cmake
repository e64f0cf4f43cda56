# Warnings are set per target (not globally) so third-party code is not held to them.
function(sbx_warnings target)
  target_compile_options(${target} PRIVATE -Wall -Wextra -Wpedantic -Wshadow -Wconversion
    -Wno-sign-conversion -Wnon-virtual-dtor -Wold-style-cast -Wcast-align -Wformat=2
    -Wimplicit-fallthrough)
  # GCC 12 reports -Wrestrict and -Wnull-dereference inside libstdc++ and
  # nlohmann headers (GCC bug 105329 and friends): false positives, not ours.
  # (GCC's own options: clang, used for tests/fuzz, refuses them as unknown.)
  if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
    target_compile_options(${target} PRIVATE -Wno-restrict)
  endif()
  if(SBX_SANITIZE AND CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
    # GCC 12 with the sanitizers reports maybe-uninitialized inside libstdc++'s std::function.
    target_compile_options(${target} PRIVATE -Wno-maybe-uninitialized)
  endif()
  if(SBX_WERROR)
    target_compile_options(${target} PRIVATE -Werror)
  endif()
  target_compile_definitions(${target} PRIVATE $<$<NOT:$<CONFIG:Debug>>:_FORTIFY_SOURCE=2>)
endfunction()
