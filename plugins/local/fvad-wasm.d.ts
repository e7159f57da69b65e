/** Types for the parts of @echogarden/fvad-wasm (libfvad compiled with emscripten) we use. */
declare module '@echogarden/fvad-wasm' {
  export interface FvadModule {
    _fvad_new(): number;
    _fvad_free(instance: number): void;
    _fvad_reset(instance: number): void;
    /** 0 on success, -1 for a mode outside 0-3. */
    _fvad_set_mode(instance: number, mode: number): number;
    /** 0 on success, -1 for a rate other than 8/16/32/48 kHz. */
    _fvad_set_sample_rate(instance: number, sampleRate: number): number;
    /** 1 speech, 0 non-speech, -1 invalid frame length (must be 10, 20 or 30 ms). */
    _fvad_process(instance: number, samplesPtr: number, length: number): number;
    _malloc(bytes: number): number;
    _free(ptr: number): void;
    readonly HEAP16: Int16Array;
  }
  const initFvad: () => Promise<FvadModule>;
  export default initFvad;
}
