/**
 * What the offline responder says, per language, and how it finds the language it must answer
 * in (the pin the LLM context appends to the system prompt: "... Always answer in French.").
 */

export type ResponderLanguage = 'en' | 'fr' | 'de' | 'es';

export interface ResponderPhrases {
  greeting: string;
  nudge: string;
  farewell: string;
  hello: string;
  howAreYou: string;
  identity: string;
  capabilities: string;
  toolList: string;
  joke: string;
  thanks: string;
  unrecognised: string;
  echo: string;
  goodbye: string;
  toolResult: string;
  toolError: string;
  toolMissingArguments: string;
  unknownTool: string;
  /** Name used when the system prompt gives none. */
  defaultName: string;
}

/** `{name}`, `{text}`, `{tool}`, `{tools}`, `{summary}`, `{arguments}` are filled in by the rules. */
export const RESPONDER_PHRASES: Readonly<Record<ResponderLanguage, ResponderPhrases>> = {
  en: {
    greeting: 'Hello! I am {name}, an offline stand-in assistant. How can I help you today?',
    nudge: 'Are you still there? I am here whenever you want to continue.',
    farewell: 'Thank you for talking with me. Goodbye!',
    hello: 'Hello! Nice to hear from you.',
    howAreYou: 'I am doing well, thank you for asking.',
    identity: 'I am {name}, an offline stand-in for a language model. My answers come from simple rules.',
    capabilities: 'I am an offline stand-in, so I can greet you, make small talk, repeat what you say, and call a tool when you say call tool and its name.',
    toolList: 'My tools are: {tools}.',
    joke: 'Why did the computer go to the doctor? Because it had a virus.',
    thanks: 'You are welcome.',
    unrecognised: 'Sorry, I did not understand that. I am an offline stand-in and only recognise a few phrases.',
    echo: 'You said: {text}',
    goodbye: 'Goodbye!',
    toolResult: 'The {tool} tool returned {summary}.',
    toolError: 'The {tool} tool failed: {summary}.',
    toolMissingArguments: 'To use {tool}, I need {arguments}.',
    unknownTool: 'I do not have that tool. My tools are: {tools}.',
    defaultName: 'your assistant',
  },
  fr: {
    greeting: 'Bonjour ! Je suis {name}, un assistant hors ligne de remplacement. Comment puis-je vous aider ?',
    nudge: 'Vous êtes toujours là ? Je suis là quand vous voulez continuer.',
    farewell: 'Merci pour cette conversation. Au revoir !',
    hello: 'Bonjour ! Ravi de vous entendre.',
    howAreYou: 'Je vais bien, merci de demander.',
    identity: 'Je suis {name}, un remplaçant hors ligne de modèle de langage. Mes réponses viennent de règles simples.',
    capabilities: 'Je suis un remplaçant hors ligne : je peux vous saluer, bavarder un peu, répéter ce que vous dites et appeler un outil quand vous dites appelle l\'outil suivi de son nom.',
    toolList: 'Mes outils sont : {tools}.',
    joke: 'Pourquoi l\'ordinateur est-il allé chez le médecin ? Parce qu\'il avait un virus.',
    thanks: 'Je vous en prie.',
    unrecognised: 'Désolé, je n\'ai pas compris. Je suis un remplaçant hors ligne et je ne reconnais que quelques phrases.',
    echo: 'Vous avez dit : {text}',
    goodbye: 'Au revoir !',
    toolResult: 'L\'outil {tool} a renvoyé {summary}.',
    toolError: 'L\'outil {tool} a échoué : {summary}.',
    toolMissingArguments: 'Pour utiliser {tool}, il me faut {arguments}.',
    unknownTool: 'Je n\'ai pas cet outil. Mes outils sont : {tools}.',
    defaultName: 'votre assistant',
  },
  de: {
    greeting: 'Hallo! Ich bin {name}, ein Offline-Ersatzassistent. Wie kann ich Ihnen helfen?',
    nudge: 'Sind Sie noch da? Ich bin bereit, wann immer Sie weitermachen möchten.',
    farewell: 'Danke für das Gespräch. Auf Wiedersehen!',
    hello: 'Hallo! Schön, von Ihnen zu hören.',
    howAreYou: 'Mir geht es gut, danke der Nachfrage.',
    identity: 'Ich bin {name}, ein Offline-Ersatz für ein Sprachmodell. Meine Antworten kommen aus einfachen Regeln.',
    capabilities: 'Ich bin ein Offline-Ersatz: Ich kann Sie begrüßen, plaudern, wiederholen, was Sie sagen, und ein Werkzeug aufrufen, wenn Sie rufe Werkzeug und seinen Namen sagen.',
    toolList: 'Meine Werkzeuge sind: {tools}.',
    joke: 'Warum ging der Computer zum Arzt? Weil er einen Virus hatte.',
    thanks: 'Gern geschehen.',
    unrecognised: 'Entschuldigung, das habe ich nicht verstanden. Ich bin ein Offline-Ersatz und erkenne nur wenige Sätze.',
    echo: 'Sie sagten: {text}',
    goodbye: 'Auf Wiedersehen!',
    toolResult: 'Das Werkzeug {tool} hat {summary} geliefert.',
    toolError: 'Das Werkzeug {tool} ist fehlgeschlagen: {summary}.',
    toolMissingArguments: 'Für {tool} brauche ich {arguments}.',
    unknownTool: 'Dieses Werkzeug habe ich nicht. Meine Werkzeuge sind: {tools}.',
    defaultName: 'Ihr Assistent',
  },
  es: {
    greeting: '¡Hola! Soy {name}, un asistente sustituto sin conexión. ¿En qué puedo ayudarle?',
    nudge: '¿Sigue ahí? Estoy aquí cuando quiera continuar.',
    farewell: 'Gracias por hablar conmigo. ¡Adiós!',
    hello: '¡Hola! Me alegra oírle.',
    howAreYou: 'Estoy bien, gracias por preguntar.',
    identity: 'Soy {name}, un sustituto sin conexión de un modelo de lenguaje. Mis respuestas salen de reglas simples.',
    capabilities: 'Soy un sustituto sin conexión: puedo saludarle, charlar un poco, repetir lo que dice y llamar a una herramienta cuando dice usa la herramienta y su nombre.',
    toolList: 'Mis herramientas son: {tools}.',
    joke: '¿Por qué fue el ordenador al médico? Porque tenía un virus.',
    thanks: 'De nada.',
    unrecognised: 'Lo siento, no le he entendido. Soy un sustituto sin conexión y solo reconozco algunas frases.',
    echo: 'Ha dicho: {text}',
    goodbye: '¡Adiós!',
    toolResult: 'La herramienta {tool} devolvió {summary}.',
    toolError: 'La herramienta {tool} falló: {summary}.',
    toolMissingArguments: 'Para usar {tool}, necesito {arguments}.',
    unknownTool: 'No tengo esa herramienta. Mis herramientas son: {tools}.',
    defaultName: 'su asistente',
  },
};

/** Language names (English and native) a pin may use, lower case. */
const LANGUAGE_NAMES: ReadonlyArray<readonly [ResponderLanguage, readonly string[]]> = [
  ['en', ['english', 'anglais', 'englisch', 'inglés', 'ingles']],
  ['fr', ['french', 'français', 'francais', 'französisch', 'francés', 'frances']],
  ['de', ['german', 'deutsch', 'allemand', 'alemán', 'aleman']],
  ['es', ['spanish', 'español', 'espanol', 'espagnol', 'spanisch']],
];

/** Verbs a pin uses before "in <language>", in the four languages. */
const PIN = /\b(?:answer|respond|reply|speak|talk|write|réponds|répondez|parle|parlez|antworte|antworten|sprich|sprechen|responde|responda|habla|hable)\b[^.!?\n]*?\b(?:in|en|auf)\s+(\p{L}+)/giu;
/** Alternative pin shape: "language: French" / "Language: fr". */
const LANGUAGE_FIELD = /\blanguage\s*[:=]\s*(\p{L}+)/giu;

/**
 * The language the last pin in the system messages asks for; `fallback` when none is found or
 * the pinned language has no phrase table (the answer is then in English, see the docs).
 */
export function pinnedLanguage(systemTexts: readonly string[], fallback: ResponderLanguage = 'en'): ResponderLanguage {
  for (const text of [...systemTexts].reverse()) {
    const candidates = [...text.matchAll(PIN), ...text.matchAll(LANGUAGE_FIELD)]
      .sort((a, b) => (a.index ?? 0) - (b.index ?? 0))
      .map((m) => m[1]!.toLowerCase());
    for (const word of candidates.reverse()) {
      const code = languageCodeOf(word);
      if (code) return code;
    }
  }
  return fallback;
}

function languageCodeOf(word: string): ResponderLanguage | undefined {
  const base = word.split('-')[0]!;
  if ((['en', 'fr', 'de', 'es'] as string[]).includes(base)) return base as ResponderLanguage;
  return LANGUAGE_NAMES.find(([, names]) => names.includes(word))?.[0];
}

/** Replaces `{key}` placeholders. */
export function fill(template: string, values: Readonly<Record<string, string>>): string {
  return template.replace(/\{(\w+)\}/g, (whole, key: string) => values[key] ?? whole);
}
