/**
 * The offline responder's rules: from a conversation to one reply, deterministically. Checked in
 * this order (the first that applies wins):
 *
 * 1. last message is a tool result -> say what the tool returned (or that it failed);
 * 2. last message is a system instruction to greet / nudge / say farewell (the behaviours'
 *    `[greeting]` / `[nudge]` / `[farewell]` instructions, or plain words), or there is no user
 *    message yet -> the canned greeting, nudge or farewell, or the owner's line when the
 *    instruction quotes one (`Base it on: "..."`);
 * 3. the user's words hold a tool-call phrase (see tool-phrase.ts) -> a tool call;
 * 4. goodbye / hang up -> the `end_call` tool when offered, else a goodbye;
 * 5. small talk: how are you, who are you, what can you do, a joke, thanks, hello;
 * 6. the speech-to-text stand-in's "[unrecognised speech]" -> an apology;
 * 7. anything else -> an echo ("You said: ...").
 */
import type { LLMMessage } from '../../../core/frames.ts';
import type { ToolDefinition } from '../../../processors/services.ts';
import { UNRECOGNISED_SPEECH } from '../unrecognised-speech.ts';
import { fill, pinnedLanguage, RESPONDER_PHRASES, type ResponderLanguage, type ResponderPhrases } from './responder-phrases.ts';
import { parseToolPhrase, spokenName } from './tool-phrase.ts';

export type Reply =
  | { readonly kind: 'text'; readonly text: string }
  | { readonly kind: 'tool-call'; readonly name: string; readonly arguments: Readonly<Record<string, unknown>> };

export const END_CALL_TOOL = 'end_call';

/** The conversation behaviours' instructions start with `[greeting]`, `[nudge]` or `[farewell]`. */
const BEHAVIOUR_TAG = /^\s*\[(greeting|nudge|farewell)\]/i;
const BASE_LINE = /Base it on: "([^"]+)"/;
const GREET_INSTRUCTION = /\b(?:greet|greeting|introduce yourself|say hello|salue|begrüße|begrüßen|saluda)\b/iu;
const NUDGE_INSTRUCTION = /\b(?:silent|silence|still there|nudge|inactiv\w*|quiet)\b/iu;
const FAREWELL_INSTRUCTION = /\b(?:farewell|say goodbye|say good-bye|conversation (?:is )?(?:ending|over)|call (?:is )?ending|wrap up)\b/iu;

const HANG_UP = /\b(?:good ?-?bye|bye|hang up|end (?:the|this) call|au revoir|raccroche[zr]?|auf wiedersehen|tschüss|leg auf|adiós|adios|cuelga|hasta luego)\b/iu;
const HELLO = /^\s*(?:hello|hi|hey|good (?:morning|afternoon|evening)|bonjour|salut|bonsoir|hallo|guten (?:tag|morgen|abend)|servus|hola|buenos días|buenas)\b/iu;
const HOW_ARE_YOU = /\b(?:how are you|how's it going|comment (?:allez-vous|vas-tu|ça va)|ça va|wie geht(?:'s| es)|cómo estás|como estas|cómo está|qué tal)\b/iu;
const IDENTITY = /\b(?:who are you|what(?:'s| is) your name|your name|qui êtes-vous|qui es-tu|comment t'appelles-tu|comment vous appelez-vous|wer bist du|wer sind sie|wie heißt du|wie heißen sie|quién eres|cómo te llamas|cómo se llama)\b/iu;
const CAPABILITIES = /\b(?:what can you do|help me|how do you work|que sais-tu faire|que pouvez-vous faire|was kannst du|was können sie|qué puedes hacer|qué sabes hacer)\b/iu;
const JOKE = /\b(?:joke|blague|witz|chiste)\b/iu;
const THANKS = /\b(?:thank you|thanks|merci|danke|gracias)\b/iu;
/** "You are Ada, ..." -> Ada (a capitalised word only: "you are a helpful assistant" names nobody). */
const NAME_IN_PROMPT = /\b(?:[Yy]ou are|[Yy]our name is|[Tt]u es|[Vv]ous êtes|[Tt]u t'appelles|[Dd]u bist|[Ss]ie sind|[Dd]u heißt|[Ee]res|[Tt]e llamas)\s+(\p{Lu}[\p{L}-]*)/u;

export interface RuleContext {
  readonly messages: readonly LLMMessage[];
  readonly tools: readonly ToolDefinition[];
}

export function decideReply({ messages, tools }: RuleContext): Reply {
  const systemTexts = messages.filter((m) => m.role === 'system').map((m) => m.content ?? '');
  const phrases = RESPONDER_PHRASES[pinnedLanguage(systemTexts)];
  const name = systemTexts.map((t) => NAME_IN_PROMPT.exec(t)?.[1]).find(Boolean) ?? phrases.defaultName;
  const say = (template: string, values: Record<string, string> = {}): Reply => ({ kind: 'text', text: fill(template, { name, ...values }) });
  const last = messages.at(-1);

  if (last?.role === 'tool') return describeToolResult(messages, last, phrases);

  if (last?.role === 'system') {
    const instruction = last.content ?? '';
    const tag = BEHAVIOUR_TAG.exec(instruction)?.[1]?.toLowerCase();
    // It cannot write a line of its own: a line the owner gave as the basis is said as it is.
    const basis = BASE_LINE.exec(instruction)?.[1];
    if (tag && basis) return { kind: 'text', text: basis };
    if (tag === 'farewell' || (!tag && FAREWELL_INSTRUCTION.test(instruction))) return say(phrases.farewell);
    if (tag === 'nudge' || (!tag && NUDGE_INSTRUCTION.test(instruction))) return say(phrases.nudge);
    if (tag === 'greeting' || (!tag && GREET_INSTRUCTION.test(instruction))) return say(phrases.greeting);
  }
  const lastUser = [...messages].reverse().find((m) => m.role === 'user');
  if (!lastUser) return say(phrases.greeting);
  const text = (lastUser.content ?? '').trim();

  const toolPhrase = parseToolPhrase(text, tools);
  const toolNames = tools.filter((t) => t.name !== END_CALL_TOOL).map((t) => spokenName(t.name)).join(', ');
  if (toolPhrase?.kind === 'call') return { kind: 'tool-call', name: toolPhrase.tool.name, arguments: toolPhrase.arguments };
  if (toolPhrase?.kind === 'missing-arguments') {
    return say(phrases.toolMissingArguments, { tool: spokenName(toolPhrase.tool.name), arguments: toolPhrase.missing.map(spokenName).join(', ') });
  }
  if (toolPhrase?.kind === 'unknown-tool') return say(phrases.unknownTool, { tools: toolNames });

  if (HANG_UP.test(text)) {
    const endCall = tools.find((t) => t.name === END_CALL_TOOL);
    return endCall ? { kind: 'tool-call', name: END_CALL_TOOL, arguments: endCallArguments(endCall) } : say(phrases.goodbye);
  }
  // A bare hello comes last: "Hi, who are you?" is a question about identity.
  if (HOW_ARE_YOU.test(text)) return say(phrases.howAreYou);
  if (IDENTITY.test(text)) return say(phrases.identity);
  if (CAPABILITIES.test(text)) return say(toolNames ? `${phrases.capabilities} ${fill(phrases.toolList, { tools: toolNames })}` : phrases.capabilities);
  if (JOKE.test(text)) return say(phrases.joke);
  if (THANKS.test(text)) return say(phrases.thanks);
  if (HELLO.test(text)) return say(phrases.hello);
  if (!text || text === UNRECOGNISED_SPEECH) return say(phrases.unrecognised);
  return say(phrases.echo, { text });
}

/** `end_call` may declare parameters; fill the required ones with something truthful. */
function endCallArguments(tool: ToolDefinition): Record<string, unknown> {
  const args: Record<string, unknown> = {};
  const properties = tool.parameters.properties as Record<string, { type?: string }>;
  for (const key of tool.parameters.required ?? []) {
    const type = properties[key]?.type;
    args[key] = type === 'boolean' ? true : type === 'number' || type === 'integer' ? 0 : 'the user said goodbye';
  }
  return args;
}

function describeToolResult(messages: readonly LLMMessage[], result: LLMMessage, phrases: ResponderPhrases): Reply {
  const call = messages.flatMap((m) => m.toolCalls ?? []).find((c) => c.toolCallId === result.toolCallId);
  const tool = spokenName(call?.name ?? 'tool');
  let value: unknown = result.content;
  try {
    value = JSON.parse(result.content ?? '');
  } catch {
    // Plain-text results are spoken as they are.
  }
  const error = typeof value === 'object' && value !== null && 'error' in value ? (value as { error: unknown }).error : undefined;
  if (error !== undefined) return { kind: 'text', text: fill(phrases.toolError, { tool, summary: summarise(error) }) };
  return { kind: 'text', text: fill(phrases.toolResult, { tool, summary: summarise(value) }) };
}

/** A short spoken rendering of a JSON value: at most four fields per level, two levels deep. */
export function summarise(value: unknown, depth = 0): string {
  if (value === null || value === undefined || value === '') return 'nothing';
  if (typeof value === 'string') return value.length > 160 ? `${value.slice(0, 157)}...` : value;
  if (typeof value !== 'object') return String(value);
  if (depth > 1) return Array.isArray(value) ? `${value.length} items` : 'details';
  if (Array.isArray(value)) return value.slice(0, 4).map((v) => summarise(v, depth + 1)).join(', ');
  const entries = Object.entries(value as Record<string, unknown>).slice(0, 4);
  return entries.map(([k, v]) => `${spokenName(k)} ${summarise(v, depth + 1)}`).join(', ');
}

export type { ResponderLanguage };
