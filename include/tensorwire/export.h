// What libtensorwire.so exports. The library is built with hidden visibility (CMakeLists.txt:
// -fvisibility=hidden on every layer), so a symbol leaves it only when its declaration says so:
//   - TW_API_BEGIN / TW_API_END enclose the declarations of each public header
//     (include/tensorwire/): the API a program is written against, stable within a SONAME;
//   - TW_INTERNAL_BEGIN / TW_INTERNAL_END enclose the declarations of each internal header (src/):
//     exported so that this project's programs, tests, benchmarks, the torch module and the ONNX
//     library can link them, but no API: they change with any release;
//   - TW_API marks one declaration.
// Hidden: a source file's own functions, and the instances of third-party templates (Asio,
// oneDNN's C++ wrappers) made inside the library, which a program would otherwise bind to and
// collide with its own copies. `nm -D --defined-only libtensorwire.so | wc -l` counts what is left.
#pragma once

#if defined(__GNUC__) || defined(__clang__)
#define TW_API __attribute__((visibility("default")))
#define TW_API_BEGIN _Pragma("GCC visibility push(default)")
#define TW_API_END _Pragma("GCC visibility pop")
#else
#define TW_API
#define TW_API_BEGIN
#define TW_API_END
#endif
#define TW_INTERNAL_BEGIN TW_API_BEGIN
#define TW_INTERNAL_END TW_API_END
