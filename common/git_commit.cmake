# Writes OUTPUT = `#define TS_GIT_COMMIT "..."`: $ENV{TS_GIT_COMMIT} when set, else git describe of
# SOURCE_DIR, else "unknown". The file is rewritten only when the text changes, so an unchanged
# commit rebuilds nothing.
if(DEFINED ENV{TS_GIT_COMMIT} AND NOT "$ENV{TS_GIT_COMMIT}" STREQUAL "")
  set(commit "$ENV{TS_GIT_COMMIT}")
else()
  execute_process(COMMAND git -C "${SOURCE_DIR}" describe --always --dirty --abbrev=12
                  OUTPUT_VARIABLE commit OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET
                  RESULT_VARIABLE result)
  if(NOT result EQUAL 0 OR commit STREQUAL "")
    set(commit "unknown")
  endif()
endif()
set(text "#define TS_GIT_COMMIT \"${commit}\"\n")
set(old "")
if(EXISTS "${OUTPUT}")
  file(READ "${OUTPUT}" old)
endif()
if(NOT old STREQUAL text)
  file(WRITE "${OUTPUT}" "${text}")
endif()
