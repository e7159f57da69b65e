/**
 * The scripted stand-in services now ship in the testing entry point (testing/scripted-services.ts);
 * this module keeps the names the tests of this folder import.
 */
export { EnergyVAD, ScriptedLLM, ScriptedSTT, ToneTTS, toneSpeech as speech, type ScriptedResponse } from '../../testing/scripted-services.ts';
