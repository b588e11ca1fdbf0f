/* malloc_tune.h — glibc malloc settings for the long-running, many-threaded
 * serving processes (llm170d, llm170-gateway). */
#ifndef LLM170_MALLOC_TUNE_H
#define LLM170_MALLOC_TUNE_H

/* Call first thing in main, before any thread exists. May start the program
 * again (execv of /proc/self/exe: same pid, same name, same argv) once, with
 * glibc.malloc.tcache_count=0 put before the GLIBC_TUNABLES it was given;
 * the second start puts the environment back as it was given, for the
 * children it starts. Then limits malloc to two arenas. `prog` names the
 * program in the one message it may print (when the restart fails, it goes
 * on untuned). */
void malloc_tune(char **argv, const char *prog);

#endif
